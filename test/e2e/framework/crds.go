package framework

// Team A's widgets: one version, a size of at most 10, a printer column,
// a short name and a category.
const WidgetsA = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd], categories: [toys]}
  versions:
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, maximum: 10, description: "How big the widget is."}
`

// Team B's widgets: same name, two other versions, another schema with a
// default and a CEL rule, a status subresource.
const WidgetsB = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {color: {type: string}}}
  - name: v2
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - {rule: "self.color != 'red' || self.shade <= 5", message: "red widgets are at most shade 5"}
            properties:
              color: {type: string, enum: [red, blue], description: "The colour of the widget."}
              shade: {type: integer, default: 3}
          status: {type: object, properties: {ready: {type: boolean}}}
`
